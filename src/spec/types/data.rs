//! `data:` training and evaluation problems, their sources and row formats.
//!
//! Part of the spec types ([`super`]); the doc comments are the user reference and generate
//! `schemas/experiment.schema.json`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::spec::language::{Checker, Language};

/// Training and evaluation problems.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Data {
    /// Training sources, concatenated in order (then shuffled if `shuffle`).
    #[schemars(length(min = 1))]
    pub train: Vec<Source>,
    /// Held-out evaluation sources. Default: none (no evaluation).
    #[serde(default)]
    pub eval: Vec<Source>,
    /// Shuffle training problems once with `seed` before cycling through them. Default `true`.
    #[serde(default = "crate::spec::defaults::yes")]
    pub shuffle: bool,
}


/// One dataset: where it is, its row format, and which problems to keep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Source {
    /// A local `.jsonl`, `.json` or `.parquet` file (relative to the spec), or
    /// `hf://owner/name[/config][:split]` for a Hugging Face dataset.
    /// Example: `hf://agentica-org/DeepCoder-Preview-Dataset/taco:train`.
    pub path: String,
    /// What metrics and reports call this source: an eval source's pass@k is written as
    /// `eval/<name>/pass@k` beside the pooled `eval/pass@k` when there are two or more eval
    /// sources. Letters, digits, `_`, `-` and `.`. Default: the file's stem (`lcb_v5.jsonl` →
    /// `lcb_v5`), or the Hugging Face dataset's config (else its name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[A-Za-z0-9_.\-]+$"))]
    pub name: Option<String>,
    /// Row format. Default `auto` (detected from the first rows).
    #[serde(default)]
    pub format: DataFormat,
    /// Keep only these problem ids.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ids: Vec<String>,
    /// Keep only these difficulties (as the dataset spells them, e.g. `easy`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub difficulty: Vec<String>,
    /// Keep only problems from these platforms (`metadata.platform`, ignoring ASCII case), e.g.
    /// LiveCodeBench's `atcoder`, `codeforces` (stdin/stdout) and `leetcode` (functional).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub platform: Vec<String>,
    /// Keep problems dated on or after this day (`YYYY-MM-DD`), where rows carry a date.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub date_from: Option<String>,
    /// Keep problems dated on or before this day (`YYYY-MM-DD`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub date_to: Option<String>,
    /// Drop the first this many problems that survive the filters above (before `limit`).
    /// With `limit` it selects a contiguous slice: MBPP's test split (task ids 11–510) is
    /// `skip: 10, limit: 500` of `mbpp.jsonl`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip: Option<u32>,
    /// Keep at most this many problems (after the filters above).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub limit: Option<u32>,
    /// Keep at most this many tests per problem, the ones with the longest inputs (as rLLM does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_tests: Option<u32>,
    /// The language the problems are to be solved in: the prompt template sees it
    /// (`problem.language`), the last fenced block in it is graded, and the record says it.
    /// stdin/stdout problems can be solved in any language; functional and assert problems only
    /// in Python. Default `python`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<Language>,
    /// Compiler flags for a compiled `language`, replacing its defaults (`-O2 -std=c++17` for
    /// `cpp`, `-O2 -std=c11` for `c`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compile_flags: Option<Vec<String>>,
    /// Seconds the compile step may take (wall clock). Default `10`, Sandbox Fusion's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.1, max = 600.0))]
    pub compile_timeout_s: Option<f64>,
    /// How stdout is compared with the expected output, for problems that do not name a checker
    /// themselves. Default `lcb` (LiveCodeBench's ladder).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checker: Option<Checker>,
    /// What becomes of the time and memory limits that rows carry themselves (Codeforces
    /// `time_limit`/`memory_limit`, CodeContests `time_limit`/`memory_limit_bytes`): by default
    /// each such problem is graded under its own limits instead of the sandbox-wide ones; this
    /// scales or caps them, or ignores them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub row_limits: Option<RowLimits>,
}

/// How a source's per-row time and memory limits are used (`data.*.row_limits`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RowLimits {
    /// Multiply each row's time limit by this (e.g. `3` for Python on limits set for C++).
    /// Default `1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.01, max = 100.0))]
    pub time_scale: Option<f64>,
    /// The most seconds per test a row may ask for (after `time_scale`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.1, max = 600.0))]
    pub time_max_s: Option<f64>,
    /// The most MiB a row may ask for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 16))]
    pub memory_max_mb: Option<u64>,
    /// Grade every problem under the sandbox-wide limits, whatever its row says.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignore: bool,
}

impl Source {
    /// What metrics and reports call it: `name`, else the file's stem, else the Hugging Face
    /// dataset's config or name; characters outside `[A-Za-z0-9_.-]` become `_`.
    pub fn label(&self) -> String {
        if let Some(name) = &self.name {
            return name.clone();
        }
        let raw = match self.path.strip_prefix("hf://") {
            // owner/name[/config][:split]
            Some(hf) => {
                let repo = hf.split(':').next().unwrap_or(hf);
                let parts: Vec<&str> = repo.split('/').collect();
                parts.get(2).or(parts.get(1)).or(parts.first()).copied().unwrap_or(hf).to_owned()
            }
            None => {
                let file = self.path.rsplit(['/', '\\']).next().unwrap_or(&self.path);
                file.rsplit_once('.').map_or(file, |(stem, _)| stem).to_owned()
            }
        };
        let clean: String = raw.chars().map(|c| if c.is_ascii_alphanumeric() || "_.-".contains(c) { c } else { '_' }).collect();
        if clean.is_empty() { "source".into() } else { clean }
    }

    /// A source with no filters and the format detected from its rows.
    pub fn new(path: impl Into<String>) -> Source {
        Source {
            path: path.into(),
            name: None,
            format: DataFormat::Auto,
            ids: vec![],
            difficulty: vec![],
            platform: vec![],
            date_from: None,
            date_to: None,
            skip: None,
            limit: None,
            max_tests: None,
            language: None,
            compile_flags: None,
            compile_timeout_s: None,
            checker: None,
            row_limits: None,
        }
    }
}

/// Dataset row formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DataFormat {
    /// Detect from the rows.
    #[default]
    Auto,
    /// LiveCodeBench native rows (public and private tests).
    Lcb,
    /// DeepCoder-Preview `primeintellect` rows.
    Primeintellect,
    /// DeepCoder-Preview / TACO / APPS rows with `{inputs, outputs, fn_name?}` tests.
    Taco,
    /// DeepCoder-Preview `lcbv5` rows.
    Lcbv5,
    /// DeepCoder-Preview `codeforces` rows.
    Codeforces,
    /// MBPP, full or sanitized.
    Mbpp,
    /// HumanEval (`prompt`, `test` with `check(candidate)`, `entry_point`).
    Humaneval,
}
