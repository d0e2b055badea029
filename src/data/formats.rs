//! Dataset row formats and their adapters to [`Problem`](super::Problem).
//!
//! Shapes:
//! - `lcb`: `{problem, starter_code, tests: [{input, output, testtype}]}` (rLLM files), the
//!   DeepCoder `lcbv5` subset (`tests` as a JSON string, `metadata.func_name`), and native
//!   LiveCodeBench rows (`question_content`, `public_test_cases` JSON string).
//! - `taco`: `{inputs, outputs, fn_name?}` under `tests` (CodeContests, DeepCoder `taco`) or as
//!   the `input_output` JSON string (TACO/APPS).
//! - `primeintellect`: `tests: [{type: stdin_stdout|function_call, input, output, fn_name?}]`.
//! - `codeforces`: `tests: [{input, output}]` (stdin).
//! - `mbpp`: full (`text`, `test_setup_code`, `test_list`) and sanitized (`prompt`,
//!   `test_imports`, `test_list`).
//! - `humaneval`: `{task_id, prompt, test, entry_point}`.
//!
//! Functional cases are normalised to LiveCodeBench's convention (arguments as one JSON value per
//! line, the expected value as JSON), so the harness has one calling convention.

use std::str::FromStr;

use serde_json::{Map, Value};

use super::problem::{IoCase, META_CATEGORY, META_CHECKER, META_CHECKER_PROGRAM, META_MEMORY_LIMIT, META_TIME_LIMIT, Problem, Tests};

/// A supported dataset row format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// LiveCodeBench (rLLM files, DeepCoder `lcbv5`, native rows).
    Lcb,
    /// TACO / APPS / CodeContests `{inputs, outputs, fn_name?}`.
    Taco,
    /// DeepCoder `primeintellect`.
    PrimeIntellect,
    /// DeepCoder `codeforces`.
    Codeforces,
    /// MBPP, full or sanitized.
    Mbpp,
    /// HumanEval.
    HumanEval,
}

impl Format {
    /// Every format, in detection-message order.
    pub const ALL: [Format; 6] =
        [Format::Lcb, Format::Taco, Format::PrimeIntellect, Format::Codeforces, Format::Mbpp, Format::HumanEval];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Format::Lcb => "lcb",
            Format::Taco => "taco",
            Format::PrimeIntellect => "primeintellect",
            Format::Codeforces => "codeforces",
            Format::Mbpp => "mbpp",
            Format::HumanEval => "humaneval",
        }
    }
}

impl FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Format::ALL.into_iter().find(|f| f.name() == s).ok_or_else(|| {
            let names: Vec<_> = Format::ALL.iter().map(|f| f.name()).collect();
            format!("unknown format `{s}`; expected one of {}", names.join(", "))
        })
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

type Row = Map<String, Value>;

/// The `tests` field, parsed when it is a JSON string (DeepCoder stores it that way).
fn tests_value(row: &Row) -> Option<Value> {
    match row.get("tests")? {
        Value::String(s) => serde_json::from_str(s).ok(),
        v => Some(v.clone()),
    }
}

/// Guess a row's format from its keys and the shape of its tests.
pub(crate) fn detect(row: &Row) -> Result<Format, String> {
    if row.contains_key("entry_point") && row.contains_key("test") && row.contains_key("prompt") {
        return Ok(Format::HumanEval);
    }
    if row.contains_key("test_list") {
        return Ok(Format::Mbpp);
    }
    if row.contains_key("public_test_cases") {
        return Ok(Format::Lcb);
    }
    if row.contains_key("input_output") {
        return Ok(Format::Taco);
    }
    match tests_value(row) {
        Some(Value::Object(o)) if o.contains_key("inputs") && o.contains_key("outputs") => Ok(Format::Taco),
        Some(Value::Array(items)) => match items.first() {
            Some(Value::Object(t)) if t.contains_key("testtype") => Ok(Format::Lcb),
            Some(Value::Object(t)) if t.contains_key("type") => Ok(Format::PrimeIntellect),
            Some(Value::Object(t)) if t.contains_key("input") && t.contains_key("output") => Ok(Format::Codeforces),
            Some(_) => Err("`tests` is a list whose items are not `{input, output, ...}` objects".into()),
            None => Err("`tests` is an empty list".into()),
        },
        Some(_) => Err("`tests` is neither a list of cases nor an `{inputs, outputs}` object".into()),
        None => {
            let mut keys: Vec<_> = row.keys().map(|k| format!("`{k}`")).collect();
            keys.sort();
            Err(format!(
                "fits no supported format (keys: {}); expected LiveCodeBench (`tests` with `testtype`, or \
                 `public_test_cases`), TACO (`inputs`/`outputs`), PrimeIntellect, Codeforces, MBPP (`test_list`) or \
                 HumanEval (`prompt`, `test`, `entry_point`)",
                keys.join(", ")
            ))
        }
    }
}

/// Convert one row, detecting its format unless `format` is given.
pub(crate) fn to_problem(row: &Row, format: Option<Format>, stem: &str, index: usize) -> Result<Problem, String> {
    let format = match format {
        Some(f) => f,
        None => detect(row)?,
    };
    let tests = match format {
        Format::Lcb => lcb_tests(row)?,
        Format::Taco => taco_tests(row)?,
        Format::PrimeIntellect => primeintellect_tests(row)?,
        Format::Codeforces => codeforces_tests(row)?,
        Format::Mbpp => mbpp_tests(row)?,
        Format::HumanEval => humaneval_tests(row)?,
    };
    let id = ["task_id", "question_id", "problem_id", "id"]
        .iter()
        .find_map(|k| match row.get(*k) {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Number(n)) => Some(n.to_string()),
            _ => None,
        })
        .unwrap_or_else(|| format!("{stem}/{index}"));
    let statement = ["problem", "question_content", "question", "text", "prompt"]
        .iter()
        .find_map(|k| row.get(*k).and_then(Value::as_str))
        .unwrap_or_default()
        .to_owned();
    let starter_code = match (&tests, row.get("starter_code").and_then(Value::as_str)) {
        (Tests::Check { prompt, .. }, _) => Some(prompt.clone()),
        (_, Some(s)) if !s.trim().is_empty() => Some(s.to_owned()),
        _ => None,
    };
    let mut metadata = Map::new();
    metadata.insert("format".into(), Value::String(format.name().into()));
    // `category`: what reports break pass@1 down by (the list-function task's operation).
    for key in ["difficulty", "platform", "contest_id", "contest_date", "question_title", "source", "date", "estimated_date", "release_date", META_CATEGORY] {
        if let Some(v) = row.get(key) {
            metadata.insert(key.into(), v.clone());
        }
    }
    // A checker the row names (`exact`, `tokens`, `float`), or a checker program's C++ source
    // (`checker_program`, or a `checker` holding a program), which the embedded sandbox runs.
    match row.get(META_CHECKER).and_then(Value::as_str) {
        Some(c) if crate::spec::types::Checker::parse(c).is_some() => {
            metadata.insert(META_CHECKER.into(), c.into());
        }
        Some(c) if c.contains("main(") => {
            metadata.insert(META_CHECKER_PROGRAM.into(), c.into());
        }
        _ => {}
    }
    if let Some(c) = row.get(META_CHECKER_PROGRAM).and_then(Value::as_str) {
        metadata.insert(META_CHECKER_PROGRAM.into(), c.into());
    }
    // The row's own limits: the problem is graded under them, not the sandbox-wide ones.
    if let Some(t) = row_time_limit_s(row) {
        metadata.insert(META_TIME_LIMIT.into(), t.into());
    }
    if let Some(m) = row_memory_limit_mb(row) {
        metadata.insert(META_MEMORY_LIMIT.into(), m.into());
    }
    Ok(Problem { id, statement, starter_code, tests, metadata })
}

/// A number and the (lower-cased) unit after it: `2 seconds`, `1.5s`, `256 megabytes`.
fn quantity(s: &str) -> Option<(f64, String)> {
    let s = s.trim();
    let end = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    Some((s[..end].parse().ok()?, s[end..].trim().to_ascii_lowercase()))
}

/// Seconds from a row's `time_limit`: a number of seconds (Codeforces dumps), `{seconds,
/// nanos}` (CodeContests), or text such as `2 seconds` or `1500 ms` (TACO).
fn row_time_limit_s(row: &Row) -> Option<f64> {
    let t = match row.get("time_limit")? {
        Value::Number(n) => n.as_f64()?,
        Value::Object(o) => o.get("seconds").and_then(Value::as_f64).unwrap_or(0.0) + o.get("nanos").and_then(Value::as_f64).unwrap_or(0.0) / 1e9,
        Value::String(s) => match quantity(s)? {
            (x, u) if u.is_empty() || u.starts_with('s') => x,
            (x, u) if u.starts_with("ms") || u.starts_with("milli") => x / 1000.0,
            _ => return None,
        },
        _ => return None,
    };
    (t > 0.0 && t.is_finite()).then_some(t)
}

/// MiB from a row's `memory_limit` (a number of MiB, or text such as `256 megabytes`) or
/// `memory_limit_bytes` (CodeContests: decimal, 256 MB is 256000000, so it is read as MB).
fn row_memory_limit_mb(row: &Row) -> Option<u64> {
    let mb = match (row.get("memory_limit"), row.get("memory_limit_bytes").and_then(Value::as_f64)) {
        (Some(Value::Number(n)), _) => n.as_f64()?,
        (Some(Value::String(s)), _) => match quantity(s)? {
            (x, u) if u.is_empty() || u.starts_with('m') => x,
            (x, u) if u.starts_with('g') => x * 1024.0,
            (x, u) if u.starts_with('k') => x / 1024.0,
            _ => return None,
        },
        (_, Some(bytes)) => bytes / 1e6,
        _ => return None,
    };
    (mb >= 1.0 && mb.is_finite()).then(|| mb.round() as u64)
}

fn str_field<'a>(v: &'a Value, key: &str) -> Result<&'a str, String> {
    v.get(key).and_then(Value::as_str).ok_or_else(|| format!("test case has no string `{key}`"))
}

/// Text of a stdin/stdout value: TACO sometimes stores a list of lines.
fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(lines) => lines.iter().map(text_of).collect::<Vec<_>>().join("\n"),
        other => other.to_string(),
    }
}

/// LiveCodeBench functional problems carry no function name; take it from the starter code
/// (`class Solution:` with its method), as rLLM and tinker do.
pub(crate) fn fn_name_from_starter(starter: &str) -> Option<String> {
    let after_class = starter.find("class Solution").map_or(starter, |i| &starter[i..]);
    let i = after_class.find("def ")?;
    let rest = &after_class[i + 4..];
    let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
    (!name.is_empty()).then_some(name)
}

fn metadata_fn_name(row: &Row) -> Option<String> {
    let meta = match row.get("metadata")? {
        Value::String(s) => serde_json::from_str::<Value>(s).ok()?,
        v => v.clone(),
    };
    meta.get("func_name").and_then(Value::as_str).map(str::to_owned)
}

fn lcb_tests(row: &Row) -> Result<Tests, String> {
    let cases = if let Some(Value::String(s)) = row.get("public_test_cases") {
        let mut cases: Vec<Value> = serde_json::from_str(s).map_err(|e| format!("`public_test_cases` is not JSON: {e}"))?;
        // Private tests are JSON or base64(zlib(pickle(JSON))); see `lcb_private`.
        if let Some(Value::String(p)) = row.get("private_test_cases") {
            cases.extend(super::lcb_private::decode(p).map_err(|e| e.to_string())?);
        }
        cases
    } else {
        match tests_value(row) {
            Some(Value::Array(c)) => c,
            _ => return Err("LiveCodeBench row without a `tests` list".into()),
        }
    };
    if cases.is_empty() {
        return Err("no tests".into());
    }
    let functional = cases.iter().any(|c| c.get("testtype").and_then(Value::as_str) == Some("functional"));
    let io: Vec<IoCase> = cases
        .iter()
        .map(|c| Ok(IoCase { input: str_field(c, "input")?.to_owned(), output: str_field(c, "output")?.to_owned() }))
        .collect::<Result<_, String>>()?;
    if functional {
        let fn_name = metadata_fn_name(row)
            .or_else(|| row.get("starter_code").and_then(Value::as_str).and_then(fn_name_from_starter))
            .ok_or("functional tests but no function name (no `metadata.func_name`, no `def` in `starter_code`)")?;
        Ok(Tests::Functional { fn_name, cases: io })
    } else {
        Ok(Tests::Stdin { cases: io })
    }
}

fn taco_tests(row: &Row) -> Result<Tests, String> {
    let v = match row.get("input_output") {
        Some(Value::String(s)) => serde_json::from_str(s).map_err(|e| format!("`input_output` is not JSON: {e}"))?,
        Some(v) => v.clone(),
        None => tests_value(row).ok_or("TACO row without `tests` or `input_output`")?,
    };
    let inputs = v.get("inputs").and_then(Value::as_array).ok_or("TACO tests without an `inputs` list")?;
    let outputs = v.get("outputs").and_then(Value::as_array).ok_or("TACO tests without an `outputs` list")?;
    if inputs.len() != outputs.len() {
        return Err(format!("{} inputs but {} outputs", inputs.len(), outputs.len()));
    }
    if inputs.is_empty() {
        return Err("no tests".into());
    }
    match v.get("fn_name").and_then(Value::as_str) {
        Some(name) => {
            let cases = inputs.iter().zip(outputs).map(|(i, o)| IoCase { input: args_lines(i), output: o.to_string() }).collect();
            Ok(Tests::Functional { fn_name: name.to_owned(), cases })
        }
        None => Ok(Tests::Stdin {
            cases: inputs.iter().zip(outputs).map(|(i, o)| IoCase { input: text_of(i), output: text_of(o) }).collect(),
        }),
    }
}

/// A call's arguments as LiveCodeBench input text: one JSON value per line.
fn args_lines(args: &Value) -> String {
    match args {
        Value::Array(a) => a.iter().map(Value::to_string).collect::<Vec<_>>().join("\n"),
        Value::String(s) => match serde_json::from_str::<Value>(s) {
            Ok(Value::Array(a)) => a.iter().map(Value::to_string).collect::<Vec<_>>().join("\n"),
            _ => s.clone(),
        },
        other => other.to_string(),
    }
}

fn json_text(v: &Value) -> String {
    match v {
        Value::String(s) if serde_json::from_str::<Value>(s).is_ok() => s.clone(),
        other => other.to_string(),
    }
}

fn primeintellect_tests(row: &Row) -> Result<Tests, String> {
    let Some(Value::Array(cases)) = tests_value(row) else { return Err("PrimeIntellect row without a `tests` list".into()) };
    if cases.is_empty() {
        return Err("no tests".into());
    }
    let fn_name = cases.iter().find_map(|c| c.get("fn_name").and_then(Value::as_str)).map(str::to_owned);
    let is_call = cases.iter().any(|c| c.get("type").and_then(Value::as_str) == Some("function_call"));
    if is_call {
        let fn_name = fn_name.or_else(|| metadata_fn_name(row)).ok_or("`function_call` tests without `fn_name`")?;
        let cases = cases
            .iter()
            .map(|c| {
                let input = c.get("input").ok_or("test case has no `input`")?;
                let output = c.get("output").ok_or("test case has no `output`")?;
                Ok(IoCase { input: args_lines(input), output: json_text(output) })
            })
            .collect::<Result<_, String>>()?;
        Ok(Tests::Functional { fn_name, cases })
    } else {
        let cases = cases
            .iter()
            .map(|c| {
                let input = c.get("input").ok_or("test case has no `input`")?;
                let output = c.get("output").ok_or("test case has no `output`")?;
                Ok(IoCase { input: text_of(input), output: text_of(output) })
            })
            .collect::<Result<_, String>>()?;
        Ok(Tests::Stdin { cases })
    }
}

fn codeforces_tests(row: &Row) -> Result<Tests, String> {
    let Some(Value::Array(cases)) = tests_value(row) else { return Err("Codeforces row without a `tests` list".into()) };
    if cases.is_empty() {
        return Err("no tests".into());
    }
    let cases = cases
        .iter()
        .map(|c| Ok(IoCase { input: str_field(c, "input")?.to_owned(), output: str_field(c, "output")?.to_owned() }))
        .collect::<Result<_, String>>()?;
    Ok(Tests::Stdin { cases })
}

fn mbpp_tests(row: &Row) -> Result<Tests, String> {
    let asserts: Vec<String> = row
        .get("test_list")
        .and_then(Value::as_array)
        .ok_or("MBPP row without a `test_list` list")?
        .iter()
        .map(|t| t.as_str().map(str::to_owned).ok_or_else(|| "`test_list` holds a non-string".to_owned()))
        .collect::<Result<_, _>>()?;
    if asserts.is_empty() {
        return Err("no tests".into());
    }
    let mut setup = row.get("test_setup_code").and_then(Value::as_str).unwrap_or_default().to_owned();
    if let Some(Value::Array(imports)) = row.get("test_imports") {
        for i in imports.iter().filter_map(Value::as_str) {
            setup.push('\n');
            setup.push_str(i);
        }
    }
    Ok(Tests::Asserts { setup, asserts })
}

fn humaneval_tests(row: &Row) -> Result<Tests, String> {
    let get = |k: &str| row.get(k).and_then(Value::as_str).map(str::to_owned).ok_or_else(|| format!("HumanEval row without `{k}`"));
    Ok(Tests::Check { test: get("test")?, entry_point: get("entry_point")?, prompt: get("prompt")? })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(v: Value) -> Row {
        match v {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    #[test]
    fn row_limits_in_every_shape_the_datasets_use() {
        let t = |v: Value| row_time_limit_s(&row(serde_json::json!({ "time_limit": v })));
        assert_eq!(t(serde_json::json!(2)), Some(2.0));
        assert_eq!(t(serde_json::json!({"seconds": 1, "nanos": 500_000_000})), Some(1.5));
        assert_eq!(t(serde_json::json!("2 seconds")), Some(2.0));
        assert_eq!(t(serde_json::json!("1500 ms")), Some(1.5));
        assert_eq!(t(serde_json::json!("fast")), None);
        assert_eq!(t(serde_json::json!(0)), None);
        let m = |v: Value| row_memory_limit_mb(&row(v));
        assert_eq!(m(serde_json::json!({"memory_limit": 256.0})), Some(256));
        assert_eq!(m(serde_json::json!({"memory_limit": "256 megabytes"})), Some(256));
        assert_eq!(m(serde_json::json!({"memory_limit": "1 gigabyte"})), Some(1024));
        assert_eq!(m(serde_json::json!({"memory_limit_bytes": 256_000_000})), Some(256));
        assert_eq!(m(serde_json::json!({"memory_limit": "lots"})), None);
        assert_eq!(m(serde_json::json!({})), None);
    }

    #[test]
    fn fn_name_comes_from_the_solution_class() {
        let s = "from typing import List\ndef helper(x): pass\nclass Solution:\n    def countSeniors(self, d: List[str]) -> int:\n";
        assert_eq!(fn_name_from_starter(s).as_deref(), Some("countSeniors"));
    }

    #[test]
    fn detects_each_deepcoder_subset() {
        let lcb = row(serde_json::json!({"problem": "p", "tests": "[{\"input\":\"1\",\"output\":\"2\",\"testtype\":\"stdin\"}]"}));
        let pi = row(serde_json::json!({"problem": "p", "tests": [{"type": "stdin_stdout", "input": "1", "output": "2"}]}));
        let cf = row(serde_json::json!({"problem": "p", "tests": [{"input": "1", "output": "2"}]}));
        let taco = row(serde_json::json!({"problem": "p", "tests": {"inputs": [[1, 2]], "outputs": [[3]], "fn_name": "add"}}));
        assert_eq!(detect(&lcb), Ok(Format::Lcb));
        assert_eq!(detect(&pi), Ok(Format::PrimeIntellect));
        assert_eq!(detect(&cf), Ok(Format::Codeforces));
        assert_eq!(detect(&taco), Ok(Format::Taco));
        let p = to_problem(&taco, None, "f", 0).unwrap();
        assert_eq!(
            p.tests,
            Tests::Functional { fn_name: "add".into(), cases: vec![IoCase { input: "1\n2".into(), output: "[3]".into() }] }
        );
    }

    #[test]
    fn an_mbpp_row_keeps_its_category() {
        let r = row(serde_json::json!({"task_id": 62001, "text": "t", "code": "c", "test_list": ["assert f() == 1"], "category": "count"}));
        let p = to_problem(&r, Some(Format::Mbpp), "f", 0).unwrap();
        assert_eq!((p.id.as_str(), p.category()), ("62001", Some("count")));
        let plain = row(serde_json::json!({"task_id": 1, "text": "t", "test_list": ["assert f() == 1"]}));
        assert_eq!(to_problem(&plain, Some(Format::Mbpp), "f", 0).unwrap().category(), None);
    }

    #[test]
    fn unknown_rows_name_their_keys() {
        let err = detect(&row(serde_json::json!({"foo": 1, "bar": 2}))).unwrap_err();
        assert!(err.contains("`bar`, `foo`"), "{err}");
    }

    #[test]
    fn primeintellect_function_calls_become_functional_cases() {
        let r = row(serde_json::json!({"problem": "p", "tests": "[{\"type\":\"function_call\",\"fn_name\":\"f\",\"input\":[1,[2,3]],\"output\":[6]}]"}));
        let p = to_problem(&r, None, "f", 3).unwrap();
        assert_eq!(p.id, "f/3");
        assert_eq!(
            p.tests,
            Tests::Functional { fn_name: "f".into(), cases: vec![IoCase { input: "1\n[2,3]".into(), output: "[6]".into() }] }
        );
    }
}
