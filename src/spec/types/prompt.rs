//! `prompt:` the prompt templates.
//!
//! Part of the spec types ([`super`]); the doc comments are the user reference and generate
//! `schemas/experiment.schema.json`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Prompt templates. Paths are relative to the spec file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Prompt {
    /// System message template. Default: no system message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<PathBuf>,
    /// User message template; sees `problem` (statement, starter_code, ...) and `vars`.
    pub user: PathBuf,
    /// Feedback turn for multi-attempt rollouts (`rollout.max_attempts > 1`); sees the failing
    /// test, expected and actual output, and the error text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feedback: Option<PathBuf>,
    /// Extra variables available to every template as `vars.<name>`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub vars: BTreeMap<String, serde_json::Value>,
}
