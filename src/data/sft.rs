//! Supervised rows: what an `sft` stage trains on. A row of a JSONL (or JSON array) file is
//! either a chat transcript (`messages: [{role, content}, …]`) or a problem whose `code` field is
//! its reference answer (MBPP's format, or any format the adapters read), which the prompt
//! templates render as the user turn and the code as the assistant's.
//!
//! Why rows keep the problem rather than rendered text: the prompt templates sit above this
//! layer (`prompt`), and rendering them here would make the data layer name a higher one.

use std::path::Path;

use serde_json::Value;

use super::error::Error;
use super::file::parse_rows;
use super::formats;
use super::problem::Problem;

/// One supervised example.
#[derive(Debug, Clone, PartialEq)]
pub enum SftRow {
    /// A transcript as written: `(role, content)` per message.
    Chat(Vec<(String, String)>),
    /// A problem and its reference solution (code, unfenced).
    Solution {
        /// The problem, as the train data's adapters read it.
        problem: Box<Problem>,
        /// The reference code.
        code: String,
    },
}

/// Reads every row of `path`.
///
/// # Errors
/// [`Error::Read`], [`Error::Json`], [`Error::NotRows`]; [`Error::Row`] for a row with neither a
/// transcript nor a reference answer, a transcript with no assistant message, or a malformed
/// message.
pub fn load_sft(path: &Path) -> Result<Vec<SftRow>, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read { path: path.to_owned(), source })?;
    let rows = parse_rows(path, &text)?;
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("sft").to_owned();
    rows.iter()
        .enumerate()
        .map(|(i, row)| to_row(row, &stem, i).map_err(|reason| Error::Row { path: path.to_owned(), row: i, reason }))
        .collect()
}

fn to_row(row: &serde_json::Map<String, Value>, stem: &str, index: usize) -> Result<SftRow, String> {
    if let Some(messages) = row.get("messages") {
        let Value::Array(items) = messages else { return Err("`messages` must be a list of {role, content}".into()) };
        let mut out = Vec::with_capacity(items.len());
        for (j, m) in items.iter().enumerate() {
            let role = m.get("role").and_then(Value::as_str);
            let content = m.get("content").and_then(Value::as_str);
            let (Some(role), Some(content)) = (role, content) else { return Err(format!("message {j} needs string `role` and `content`")) };
            out.push((role.to_owned(), content.to_owned()));
        }
        if !out.iter().any(|(r, _)| r == "assistant") {
            return Err("the transcript has no assistant message: nothing to train on".into());
        }
        return Ok(SftRow::Chat(out));
    }
    let Some(code) = row.get("code").and_then(Value::as_str).filter(|c| !c.trim().is_empty()) else {
        return Err("no reference completion: a row needs `messages` (a transcript) or `code` (a problem's reference solution)".into());
    };
    let problem = formats::to_problem(row, None, stem, index)?;
    Ok(SftRow::Solution { problem: Box::new(problem), code: code.to_owned() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_transcripts_and_reference_solutions_and_names_a_bad_row() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("rows.jsonl");
        let mbpp = r#"{"task_id": 1, "text": "Add.", "code": "def add(a, b):\n    return a + b", "test_list": ["assert add(1, 2) == 3"]}"#;
        let chat = r#"{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}"#;
        std::fs::write(&p, format!("{mbpp}\n{chat}\n")).unwrap();
        let rows = load_sft(&p).unwrap();
        assert!(matches!(&rows[0], SftRow::Solution { code, problem } if code.starts_with("def add") && problem.statement == "Add."));
        assert_eq!(rows[1], SftRow::Chat(vec![("user".into(), "hi".into()), ("assistant".into(), "hello".into())]));
        std::fs::write(&p, format!("{chat}\n{}\n", r#"{"task_id": 2, "text": "x", "test_list": ["assert True"]}"#)).unwrap();
        let e = load_sft(&p).unwrap_err().to_string();
        assert!(e.contains("row 1: no reference completion"), "{e}");
        std::fs::write(&p, r#"{"messages": [{"role": "user", "content": "hi"}]}"#).unwrap();
        assert!(load_sft(&p).unwrap_err().to_string().contains("no assistant message"));
    }
}
