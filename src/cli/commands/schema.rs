//! `rlx schema`: the JSON Schema of specs on stdout.

use crate::cli::{exit, printer};

/// Prints the schema. A reader that closes the pipe early (`rlx schema | head -1`) is not an
/// error: [`printer::out`] exits 0 quietly.
///
/// # Errors
/// Never in practice (the schema is built from types and always serializes).
pub(super) fn schema() -> anyhow::Result<u8> {
    printer::out(serde_json::to_string_pretty(&crate::spec::schema::json_schema())?);
    Ok(exit::OK)
}
