//! `rlx schema`: the JSON Schema of specs on stdout.

use crate::cli::{exit, printer};

pub fn schema() -> anyhow::Result<u8> {
    printer::out(serde_json::to_string_pretty(&crate::spec::schema::json_schema())?);
    Ok(exit::OK)
}
