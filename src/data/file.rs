//! Local problem files: a `.json` array or `.jsonl` lines of rows, each turned into a
//! [`Problem`] by the format adapters (detected per row, or the one asked for).

use std::path::Path;

use super::error::Error;
use super::formats::{self, Format};
use super::problem::Problem;

/// Load every problem of a local `.json` or `.jsonl` file.
///
/// With `format` = `None` each row's format is detected from its keys; the first row that fits no
/// format is an error naming the file and the row.
///
/// # Errors
/// [`Error::Read`], [`Error::Json`], [`Error::NotRows`], [`Error::Row`].
pub fn load_file(path: &Path, format: Option<Format>) -> Result<Vec<Problem>, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read { path: path.to_owned(), source })?;
    let rows = parse_rows(path, &text)?;
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("problems").to_owned();
    rows.into_iter()
        .enumerate()
        .map(|(i, row)| {
            formats::to_problem(&row, format, &stem, i).map_err(|reason| Error::Row { path: path.to_owned(), row: i, reason })
        })
        .collect()
}

pub(crate) fn parse_rows(path: &Path, text: &str) -> Result<Vec<serde_json::Map<String, serde_json::Value>>, Error> {
    let trimmed = text.trim_start();
    if trimmed.starts_with('[') {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|source| Error::Json { path: path.to_owned(), line: source.line(), source })?;
        let serde_json::Value::Array(items) = value else { return Err(Error::NotRows { path: path.to_owned() }) };
        items
            .into_iter()
            .map(|v| match v {
                serde_json::Value::Object(m) => Ok(m),
                _ => Err(Error::NotRows { path: path.to_owned() }),
            })
            .collect()
    } else {
        let mut rows = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let v: serde_json::Value =
                serde_json::from_str(line).map_err(|source| Error::Json { path: path.to_owned(), line: i + 1, source })?;
            match v {
                serde_json::Value::Object(m) => rows.push(m),
                _ => return Err(Error::NotRows { path: path.to_owned() }),
            }
        }
        Ok(rows)
    }
}
