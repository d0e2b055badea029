//! LiveCodeBench's `private_test_cases` field, in either of its two encodings.
//!
//! `livecodebench/code_generation_lite` stores the hidden tests of newer releases as
//! `base64(zlib(pickle(json_string)))` (Python: `json.loads(pickle.loads(zlib.decompress(
//! base64.b64decode(s))))`); older rows hold the JSON string itself. Both decode to the same list
//! of `{input, output, testtype}` cases that `public_test_cases` holds. The pickle is read with
//! `serde-pickle`, which only builds plain values (no Python objects are ever instantiated), so a
//! hostile row cannot do more than fail to decode.

use std::io::Read;

use base64::Engine;
use serde_json::Value;

/// Decompressed pickles larger than this are refused. LiveCodeBench's largest private test sets
/// are tens of MB; the cap only stops a zlib bomb in a malformed row from exhausting memory.
const MAX_DECOMPRESSED: u64 = 1 << 30;

/// Why a `private_test_cases` value could not be decoded; each variant names the layer that failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// Neither JSON nor base64.
    #[error("`private_test_cases` is neither a JSON list nor base64 ({0})")]
    Base64(#[source] base64::DecodeError),
    /// base64 that does not hold a zlib stream.
    #[error("`private_test_cases` is base64 but not zlib-compressed data ({0})")]
    Zlib(#[source] std::io::Error),
    /// The stream inflates past [`MAX_DECOMPRESSED`].
    #[error("`private_test_cases` inflates to more than {} MiB; refusing it", MAX_DECOMPRESSED >> 20)]
    TooLarge,
    /// The inflated bytes are not a pickled string.
    #[error("`private_test_cases` does not hold a pickled string ({0})")]
    Pickle(#[source] serde_pickle::Error),
    /// The decoded string is not a JSON list of cases.
    #[error("`private_test_cases` decodes to text that is not a JSON list of test cases ({0})")]
    Json(String),
}

/// Decode a `private_test_cases` value into its list of test-case objects.
///
/// An empty or whitespace-only value is an empty list (rows without hidden tests).
///
/// # Errors
/// One [`Error`] variant per encoding layer that failed.
pub(crate) fn decode(field: &str) -> Result<Vec<Value>, Error> {
    let trimmed = field.trim();
    if trimmed.is_empty() {
        return Ok(Vec::new());
    }
    // The plain-JSON encoding always starts with `[`, which is not a base64 character.
    if trimmed.starts_with('[') {
        return json_cases(trimmed);
    }
    let compressed = base64::engine::general_purpose::STANDARD.decode(trimmed).map_err(Error::Base64)?;
    let mut pickled = Vec::new();
    flate2::read::ZlibDecoder::new(compressed.as_slice())
        .take(MAX_DECOMPRESSED + 1)
        .read_to_end(&mut pickled)
        .map_err(Error::Zlib)?;
    if pickled.len() as u64 > MAX_DECOMPRESSED {
        return Err(Error::TooLarge);
    }
    let text: String = serde_pickle::from_slice(&pickled, serde_pickle::DeOptions::new()).map_err(Error::Pickle)?;
    json_cases(&text)
}

fn json_cases(text: &str) -> Result<Vec<Value>, Error> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Array(cases)) => Ok(cases),
        Ok(other) => Err(Error::Json(format!("found a JSON {}", kind(&other)))),
        Err(e) => Err(Error::Json(e.to_string())),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_json_passes_through() {
        let cases = decode(r#" [{"input": "1\n", "output": "2\n", "testtype": "stdin"}] "#).unwrap();
        assert_eq!(cases.len(), 1);
        assert_eq!(cases[0]["output"], "2\n");
        assert!(decode("  ").unwrap().is_empty());
    }

    #[test]
    fn each_layer_reports_its_own_failure() {
        assert!(matches!(decode("not base64 !"), Err(Error::Base64(_))));
        // Valid base64 of bytes that are not a zlib stream.
        assert!(matches!(decode("aGVsbG8gd29ybGQ="), Err(Error::Zlib(_))));
        assert!(matches!(decode(r#"{"input": 1}"#), Err(Error::Base64(_))));
        assert!(matches!(decode("[1, 2"), Err(Error::Json(_))));
    }
}
